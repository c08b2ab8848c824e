"""The write path's database side: the group committer and its lanes, the snapshot the rules
judge against, the rows a publish stores and the one statement that stores them."""

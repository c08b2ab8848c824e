"""`tms mirror`: a member's verified copy of one collection, brought down with NIP-77 and
followed live, checked against the server's (cosigned) log after every sync."""

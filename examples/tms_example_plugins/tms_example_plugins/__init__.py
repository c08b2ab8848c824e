"""Two TMS plugins, each a module whose `plugin` factory the `tms.plugins` entry points name."""

"""A server's lifecycle: its process group started at a lower CPU priority and stopped whole,
a watchdog for a server that hangs, its failures named in its own words, its identity checked,
and the secrets it is given kept out of everything written."""

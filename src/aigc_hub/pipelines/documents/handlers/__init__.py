"""The documents pipeline's consumer groups, one module each, named like the group."""

"""Clients of the outside systems avcc calls: the chains a work is notarized on."""

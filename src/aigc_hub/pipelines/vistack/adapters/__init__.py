"""Clients of the outside systems vistack calls: the transcoder's gRPC service."""

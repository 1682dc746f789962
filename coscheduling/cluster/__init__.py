"""Talking to the API server: raw-JSON requests, watches, bindings, events and status."""

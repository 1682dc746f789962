"""Scheduling plugins, one package each, and the registry of the ones built in."""

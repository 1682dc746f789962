"""Compact internal records parsed from the API server's raw JSON.

The scheduler never holds the client's generated models: they cost ~20x more to build
than these records and keep far more memory per object.
"""

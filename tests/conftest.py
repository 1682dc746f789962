"""Shared test settings."""

from __future__ import annotations

import os

from hypothesis import settings

# CI explores the same inputs on every run (reproducible results); local runs explore anew.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

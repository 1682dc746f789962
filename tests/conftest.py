"""Shared test settings."""

from __future__ import annotations

import os

from hypothesis import settings

# grpc as the server runs it: coscheduling.server sets how grpc polls before grpc is first
# imported (coscheduling/server/polling.py), so do that before any test module imports grpc.
import coscheduling.server  # noqa: F401

# CI explores the same inputs on every run (reproducible results); local runs explore anew.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

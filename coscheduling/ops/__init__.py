"""What the process runs with at every layer: logging, the HTTP endpoint for metrics and
probes, and deterministic fault injection for the crash tests."""

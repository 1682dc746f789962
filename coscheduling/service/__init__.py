"""The running scheduler: the process's set-up (process) and the wiring of client, watches,
scheduler and reporter, started and stopped together (wiring)."""

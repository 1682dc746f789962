"""Commands for people, beside the entry points: why a gang waits (explain) and the guided
demo on a local control plane (demo)."""

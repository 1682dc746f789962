"""What-if: would a job fit, and if not, what is missing (issue 29)."""

"""Generated from proto/ by `make proto`: do not edit."""

"""Programs run by third-party consumers (each in its own interpreter) against our topics."""

"""Runs: creating, driving, leases, recovery, persistence, representation."""

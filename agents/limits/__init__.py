"""Limits: daily token quotas, rate limits, the usage trigger."""

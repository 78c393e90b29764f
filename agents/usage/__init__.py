"""Usage: daily token quotas, prices and spend, rate limits, the usage trigger, what an owner may spend."""

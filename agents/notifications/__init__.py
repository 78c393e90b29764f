"""Notifications: webhooks and reviewer e-mail."""

"""Schedules: runs started on a cron expression or an interval (docs/schedules.md)."""

"""Dates as ISO 8601 reads them (2026-12-03 11:17:05), in every page, instead of English's "Dec. 3, 2026, 11:17 a.m."
beside the ISO form some pages wrote by hand. Times are in TIME_ZONE (UTC)."""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s"
TIME_FORMAT = "H:i:s"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"

"""The site's date formats (FORMAT_MODULE_PATH): one format for every date and time the console and the pages show."""

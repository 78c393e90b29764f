"""The HTTP views, one module per resource."""

"""The API's routers, one module per resource."""

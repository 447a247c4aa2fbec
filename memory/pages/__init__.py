"""Browser pages (HTMX) where people see, edit and forget what the agent remembers about them."""

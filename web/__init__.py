"""Web UI: templates, static assets, chart builders."""

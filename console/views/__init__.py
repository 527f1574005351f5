"""The console's pages, one module per area. Views parse, call services and selectors, render."""

"""The console's forms, one module per area: parsing and messages only; the services decide."""

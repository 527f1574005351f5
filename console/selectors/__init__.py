"""What the console's pages show, one module per area, read through the apps' models and
selectors within the member's scope (``Console.scoped``). A page's queries do not grow with
its rows."""

"""/memory, /link and /forgetme (SPEC section 6): the table, the router, the button codec and
the commands by subject."""

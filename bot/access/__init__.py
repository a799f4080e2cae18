"""Who may reach which character, and how often (SPEC 13): `[access]` rules, `[limits]`, and
the Gate every path asks for the character that will answer."""

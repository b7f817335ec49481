"""Rules the extender (``app``) and the node agent (``agent``) must apply identically. Imports nothing from
either, so both can import it without a cycle."""

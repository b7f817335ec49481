"""The ``ballast`` command: composes the extender's, the annotator's and the agent's subcommands. The only
package that imports both ``app`` and ``agent`` (``tests/test_import_graph.py`` keeps it so)."""

"""The conformance suite as test modules: ``pytest --pyargs ember.testing.suite``."""

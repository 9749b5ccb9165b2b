"""Tests of collector/ingest."""

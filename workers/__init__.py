"""Celery app and tasks of the plan pipeline."""

"""Guardian's project package: settings, URLs, the Celery app and the versioned policy models.

Nothing is imported here on purpose: the framework-free engine lives below this package and
must stay importable without Django or Celery. The Celery app is loaded in AppConfig.ready().
"""

"""The fleet: GPU models, regions, clusters, racks, nodes and GPUs; node lifecycle and
provisioning through drivers and Celery tasks."""

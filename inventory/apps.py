from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        from inventory import hooks, provisioning, tasks

        hooks.provisioning_started.register(provisioning.run_started)
        hooks.provisioning_step_enqueue.register(tasks.provision_step_enqueue)

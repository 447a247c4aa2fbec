"""`migrate` that runs as the schema owner (the `owner` database alias) unless told otherwise."""

from django.core.management.commands.migrate import Command as MigrateCommand


class Command(MigrateCommand):
    def add_arguments(self, parser) -> None:  # noqa: ANN001
        super().add_arguments(parser)
        parser.set_defaults(database="owner")

"""Which price table a command uses: the project's stacks/prices.yaml when `aksgpu prices refresh`
wrote one, else the table shipped with aksgpu."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.preflight.cost import CostEstimate
    from aksgpu.preflight.prices import PriceTable

PROJECT_TABLE = "prices.yaml"  # in the project's stack folder, beside environments.yaml


def project_table_path(project_dir: Path) -> Path:
    from aksgpu.project.stackfile import stack_config_dir

    return project_dir / stack_config_dir(project_dir) / PROJECT_TABLE


def price_table(project_dir: Path | None) -> PriceTable:
    """The project's refreshed table, or the shipped one; a broken project table is a UserError."""
    from aksgpu.errors import UserError
    from aksgpu.preflight.prices import PriceTableError, read_table, shipped_table

    if project_dir is None:
        return shipped_table()
    path = project_table_path(project_dir)
    if not path.is_file():
        return shipped_table()
    try:
        return read_table(path)
    except PriceTableError as error:
        raise UserError(f"{error}. Fix: run `aksgpu prices refresh` again, or delete {path} to use the table "
                        "shipped with aksgpu.") from None


def cost_of(spec: ClusterSpec, project_dir: Path | None) -> CostEstimate:
    from aksgpu.preflight.cost import estimate

    return estimate(spec, price_table(project_dir))

"""The stack config refuses exactly the QOS limits the slurm_accounting module would refuse
at configure time, so a bad limit stops before any machine exists."""

import pytest
import slurm_accounting_plan as planner

from infra.stack import accounting as accounting_config
from infra.stack.config import ConfigError, parse_config


def test_tres_names_and_preempt_modes_are_the_modules():
    assert accounting_config.TRES_BASE == planner.TRES_BASE
    assert accounting_config.TRES_TYPED_RE.pattern == planner.TRES_TYPED_RE.pattern
    assert set(accounting_config.QOS_PREEMPT_MODES) == set(planner.PREEMPT_MODES)


def config_accepts(field: str, value: str) -> bool:
    try:
        parse_config({"metalslurm:accounting": {"qos": [{"name": "q",
                                                           "limits": {field: value}}]}})
    except ConfigError:
        return False
    return True


def module_accepts(value: str) -> bool:
    try:
        planner.parse_tres(value)
    except planner.InputError:
        return False
    return True


@pytest.mark.parametrize("value", [
    "gres/gpu=43200", "gres/gpu:h100=8,cpu=64", "mem=512G", "license/matlab=2", "node=4",
    "billing=100", "gpu=8", "gpus:8", "cpu=abc", "mem=1X", "gres/gpu=8G"])
def test_the_config_and_the_module_agree_on_each_tres_limit(value):
    assert config_accepts("MaxTRESPerUser", value) == module_accepts(value), value

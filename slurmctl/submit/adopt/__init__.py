"""Adopting what researchers already have: an existing sbatch script run as written inside the platform
(plan.py), read line by line (script.py: #SBATCH and command-line options; body.py: launchers and
environment lines)."""

from slurmctl.submit.adopt.plan import AdoptPlan, adopt, plan_adopt

__all__ = ["AdoptPlan", "adopt", "plan_adopt"]

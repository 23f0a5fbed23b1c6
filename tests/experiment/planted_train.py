"""``python tests/experiment/planted_train.py [train args]``: ``rmsnorm_kernel.train`` with the
planted wrong norms of :mod:`planted_norms` buildable (``norm=planted_eps`` / ``planted_grad``)
and their configs on Hydra's search path. For the GPU check that the LM criterion fails them::

    python tests/experiment/planted_train.py --multirun experiment=llama_h200 \
        norm=hf,planted_eps,planted_grad hydra.sweep.dir=/tmp/planted

Test tooling only: nothing under ``src/`` or ``conf/`` knows these norms.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from planted_norms import SEARCHPATH, planted_norm  # noqa: E402

from rmsnorm_kernel import train  # noqa: E402

if __name__ == "__main__":
    with planted_norm():
        sys.argv = [sys.argv[0], *sys.argv[1:], SEARCHPATH]  # Hydra reads sys.argv
        train.main()

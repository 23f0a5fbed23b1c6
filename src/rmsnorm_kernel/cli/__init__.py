"""The command set: ``python -m rmsnorm_kernel.cli <command> [hydra overrides...]``.

Sits on top of the kernel layer and the experiment layer; nothing below imports it.

    main         argument parsing and dispatch (one command per Make target)
    campaigns    check-forward / check-backward / check-weight against the float64 oracle
    exercise     mutation testing: planted kernel bugs that the campaigns must catch
    bench        latency and bandwidth against the peers
    plots        PNG figures from the JSON the commands write
    clean        delete generated files
    environment  which backend runs the kernels, proven by one launch
"""

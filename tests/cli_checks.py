"""One check shared by the CLI tests: a refusal is one line on stderr, exit 2, no traceback."""


def one_line_exit_2(capsys, argv, *needles):
    """Run ``rscale argv`` in process; assert exit 2, one stderr line without a traceback,
    containing each of ``needles``; return that line."""
    from rscale.cli import main

    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err

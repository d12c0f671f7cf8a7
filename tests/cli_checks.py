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


def refused_writing_nothing(capsys, argv, pattern, folder):
    """Run ``rscale argv`` in process; assert exit 2, one stderr line matching the regular
    expression ``pattern`` without a traceback, and no file added or removed under ``folder``."""
    import re

    from rscale.cli import main

    before = {p.relative_to(folder) for p in folder.rglob("*")}
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(pattern, err), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert {p.relative_to(folder) for p in folder.rglob("*")} == before
    return err

from jdisc.version import __version__

# rendezvous/: filled in by its module (see the top Makefile for conventions).

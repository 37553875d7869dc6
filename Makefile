.PHONY: demo test

# One federation end to end on this machine: prints dig lines through each cluster's resolver.
demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

"""PodScope benchmarks (``make bench``): medians and ratios against peers run alongside."""

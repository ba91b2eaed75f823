// The node's detectors: stragglers, pipeline bubbles and hung collectives. Each
// is a pure function of the signals the detection pass builds from state, and
// the time.
#pragma once
#include "userspace/detect/bubble_detector.h"
#include "userspace/detect/hang_detector.h"
#include "userspace/detect/straggler_detector.h"

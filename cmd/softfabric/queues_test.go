package main

import (
	"testing"

	"github.com/softfabric/softfabric/ctrl"
)

func TestTooFewQueues(t *testing.T) {
	veth := &ctrl.Channels{MaxRx: 2, MaxTx: 2, Rx: 1, Tx: 1}
	nic := &ctrl.Channels{MaxCombined: 8, MaxOther: 1, Combined: 4, Other: 1}
	for _, tc := range []struct {
		dev  ctrl.Device
		n    int
		want string
	}{
		{ctrl.Device{Name: "a", Queues: 1, MaxRxQueues: 2, Channels: veth}, 2,
			"a has 1 active queue (2 allocated); --queues 2 needs more: raise them with 'ethtool -L a rx 2 tx 2'"},
		{ctrl.Device{Name: "a", Queues: 1, MaxRxQueues: 2, Channels: veth}, 3,
			"a has 1 active queue; --queues 3 needs more: the driver allocated only 2"},
		{ctrl.Device{Name: "eth0", Queues: 4, MaxRxQueues: 9, Channels: nic}, 6,
			"eth0 has 4 active queues (8 allocated); --queues 6 needs more: raise them with 'ethtool -L eth0 combined 6'"},
		{ctrl.Device{Name: "eth0", Queues: 4, MaxRxQueues: 9, Channels: nic}, 9,
			"eth0 has 4 active queues; --queues 9 needs more: the driver allocated only 8"},
		{ctrl.Device{Name: "br0", Queues: 1, MaxRxQueues: 1}, 2,
			"br0 has 1 active queue; --queues 2 needs more: the driver allocated only 1"},
		{ctrl.Device{Name: "x0", Queues: 1, MaxRxQueues: 4}, 2,
			"x0 has 1 active queue (4 allocated); --queues 2 needs more, and its driver has no channels to raise (ethtool -l)"},
	} {
		if got := tooFewQueues(&tc.dev, tc.n).Error(); got != tc.want {
			t.Errorf("tooFewQueues(%s, %d):\n got %q\nwant %q", tc.dev.Name, tc.n, got, tc.want)
		}
	}
}

func TestQueuesLine(t *testing.T) {
	for _, tc := range []struct {
		s    Status
		want string
	}{
		{Status{Queues: 1, MaxQueues: 2, QueueSrc: "ethtool", QueuesUp: 1, Serves: 1}, "1 active of 2 allocated (ethtool)"},
		{Status{Queues: 2, MaxQueues: 2, QueueSrc: "ethtool", QueuesUp: 1, Serves: 2}, "2 active of 2 allocated (ethtool; 1 at up: a newly opened device serves 2)"},
		{Status{Queues: 4, MaxQueues: 4, QueueSrc: "ethtool", QueuesUp: 4, QueueLim: 2, Serves: 2}, "4 active of 4 allocated (ethtool; --queues 2: a newly opened device serves 2)"},
		{Status{Queues: 1, MaxQueues: 1, QueueSrc: "sysfs", QueuesUp: 2, QueueLim: 2, Serves: 1}, "1 active of 1 allocated (sysfs; --queues 2; 2 at up: a newly opened device serves 1)"},
	} {
		if got := queuesLine(&tc.s); got != tc.want {
			t.Errorf("queuesLine(%+v):\n got %q\nwant %q", tc.s, got, tc.want)
		}
	}
}

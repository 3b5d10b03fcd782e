package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
)

// collector exports the daemon's counters to Prometheus, read at each
// scrape: the classifier's verdicts, each worker's frames, and each
// application's frames and the transport counters it reports.
type collector struct{ d *Daemon }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("softfabric_"+name, help, labels, nil)
}

var (
	descVerdicts   = desc("classifier_frames_total", "Frames the XDP classifier judged, by verdict.", "iface", "verdict")
	descWorkerRx   = desc("worker_rx_frames_total", "Frames a daemon worker took from its queue's AF_XDP socket.", "iface", "queue")
	descWorkerTx   = desc("worker_tx_frames_total", "Frames a daemon worker sent on its queue's AF_XDP socket.", "iface", "queue")
	descWorkerLoop = desc("worker_looped_frames_total", "Frames from one application on the device to another (or itself) that a daemon worker switched between their rings instead of sending them.", "iface", "queue")
	descWorkerDrop = desc("worker_dropped_frames_total", "Frames a daemon worker dropped, by reason.", "iface", "queue", "reason")
	descWorkerWait = desc("worker_parked_frames", "Frames a daemon worker holds parked now for applications whose rings are full.", "iface", "queue")
	descWorkerPark = desc("worker_parked_total", "Frames a daemon worker kept aside for an application whose ring was full, to deliver once it has room (instead of dropping them or holding up the others).", "iface", "queue")
	descWorkerKick = desc("worker_tx_kicks_total", "sendto(2) calls a daemon worker made to push its AF_XDP socket's tx ring to the NIC (tx frames over kicks: frames a call).", "iface", "queue")
	descWorkerIdle = desc("worker_sleeps_total", "Times a daemon worker slept idle.", "iface", "queue")
	descWorkerHand = desc("worker_expectations_total", "Expectations (reads an application announced) a daemon worker handed to the worker their responses arrive at (handed), and those that did not take effect on the way (late: a full ring, or responses already passed).", "iface", "queue", "how")
	descCMRejects  = desc("cm_rejects_total", "RDMA-CM connection requests no application took, rejected by the daemon (REJ Invalid Service ID, or SIDR_REP Unsupported).", "iface", "queue")
	descApps       = desc("applications", "Applications attached to the daemon.", "iface")
	descConns      = desc("control_connections_refused_total", "Connections to the daemon's control socket it did not serve: refused (a user it does not admit, answered with the refusal) or dropped (closed at once, past its limits on connections).", "iface", "how")
	descRingBytes  = desc("application_ring_bytes", "Bytes of shared rings each application has (two a queue), resident once they have gone round.", "iface")
	descAppQPs     = desc("application_qps", "Queue pair numbers an application holds.", "iface", "app", "pid", "name")
	descAppMem     = desc("application_shared_memory_bytes", "Memory an application shares with the daemon (add_memory).", "iface", "app", "pid", "name")
	descAppFrames  = desc("application_frames_total", "Frames delivered to (rx) and sent for (tx) an application.", "iface", "app", "pid", "name", "direction")
	descAppDrop    = desc("application_dropped_frames_total", "Frames of an application dropped: denied (it may not send them) or ring_full (for it, its ring full).", "iface", "app", "pid", "name", "reason")
	descAppPlaced  = desc("application_shared_memory_frames_total", "Frames whose payload the daemon moved straight between the NIC and memory an application shares with it: placed (received, announced by the application) or gathered (sent).", "iface", "app", "pid", "name", "how")
	descTransport  = desc("application_transport_total", "Transport counters an application reports (retransmits, timeouts, NAKs sent and received by kind, CQ overruns, packets from an address other than the connected peer's).", "iface", "app", "pid", "name", "counter")
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVerdicts, descWorkerRx, descWorkerTx, descWorkerLoop, descWorkerDrop, descWorkerIdle, descWorkerKick, descWorkerPark, descWorkerWait, descWorkerHand, descCMRejects, descApps, descConns, descRingBytes, descAppQPs, descAppMem, descAppFrames, descAppDrop, descAppPlaced, descTransport} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	iface := d.q.Dev.Name
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	if v, err := d.q.Classifier.Counters(); err == nil {
		for _, x := range []struct {
			name string
			v    uint64
		}{{"redirected", v.Redirected}, {"passed", v.Passed}, {"bad_version", v.BadVersion}, {"bad_pkey", v.BadPKey},
			{"unknown_qpn", v.UnknownQPN}, {"short", v.Short}, {"no_socket", v.NoSocket}, {"rule_drop", v.RuleDrop}} {
			counter(descVerdicts, x.v, iface, x.name)
		}
	}
	st := d.stats()
	for _, w := range st.Workers {
		q := strconv.Itoa(w.Queue)
		counter(descWorkerRx, w.RxFrames, iface, q)
		counter(descWorkerTx, w.TxFrames, iface, q)
		counter(descWorkerLoop, w.Looped, iface, q)
		counter(descWorkerDrop, w.Unknown, iface, q, "unknown_qpn")
		counter(descWorkerDrop, w.Malformed, iface, q, "malformed")
		counter(descWorkerDrop, w.RingFulls, iface, q, "ring_full")
		counter(descWorkerIdle, w.Sleeps, iface, q)
		counter(descWorkerKick, w.Kicks, iface, q)
		counter(descWorkerPark, w.Parked, iface, q)
		ch <- prometheus.MustNewConstMetric(descWorkerWait, prometheus.GaugeValue, float64(w.ParkedNow), iface, q)
		counter(descCMRejects, w.CMRejects, iface, q)
		counter(descWorkerHand, w.ExpectationsHanded, iface, q, "handed")
		counter(descWorkerHand, w.ExpectationsLate, iface, q, "late")
	}
	ch <- prometheus.MustNewConstMetric(descApps, prometheus.GaugeValue, float64(len(st.Apps)), iface)
	counter(descConns, st.Refused, iface, "refused")
	counter(descConns, st.Dropped, iface, "dropped")
	ch <- prometheus.MustNewConstMetric(descRingBytes, prometheus.GaugeValue, float64(st.RingBytes), iface)
	for _, a := range st.Apps {
		l := []string{iface, strconv.FormatUint(uint64(a.ID), 10), strconv.Itoa(a.PID), a.Name}
		ch <- prometheus.MustNewConstMetric(descAppQPs, prometheus.GaugeValue, float64(len(a.QPs)), l...)
		ch <- prometheus.MustNewConstMetric(descAppMem, prometheus.GaugeValue, float64(a.MemBytes), l...)
		counter(descAppFrames, a.RxFrames, append(l, "rx")...)
		counter(descAppFrames, a.TxFrames, append(l, "tx")...)
		counter(descAppDrop, a.Denied, append(l, "denied")...)
		counter(descAppDrop, a.Dropped, append(l, "ring_full")...)
		counter(descAppPlaced, a.Placed, append(l, "placed")...)
		counter(descAppPlaced, a.Gathered, append(l, "gathered")...)
		if t := a.Transport; t != nil {
			for _, x := range transportCounters(t) {
				counter(descTransport, x.v, append(l, x.name)...)
			}
		}
	}
}

type named struct {
	name string
	v    uint64
}

func transportCounters(t *daemonapi.Transport) []named {
	return []named{{"retransmits", t.Retransmits}, {"timeouts", t.Timeouts}, {"late_timeouts", t.LateTimeouts},
		{"seq_naks_sent", t.SeqNAKsSent}, {"seq_naks_rcvd", t.SeqNAKsRcvd}, {"rnr_naks_sent", t.RNRNAKsSent},
		{"rnr_naks_rcvd", t.RNRNAKsRcvd}, {"err_naks_sent", t.ErrNAKsSent}, {"err_naks_rcvd", t.ErrNAKsRcvd},
		{"cq_overruns", t.CQOverruns}, {"misaddressed", t.Misaddressed}}
}

// ServeMetrics serves the daemon's metrics on addr (/metrics) until the
// daemon stops. It returns once it listens.
func (d *Daemon) ServeMetrics(addr string) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector{d}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("daemon: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.logf("metrics: %v", err)
		}
	}()
	go func() {
		defer d.wg.Done()
		<-d.ctx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	d.logf("metrics on http://%s/metrics", ln.Addr())
	return nil
}

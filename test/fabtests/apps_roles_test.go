package fabtests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// The rma4 scenario is one application of many on a device: four MSG
// endpoints (four RC queue pairs) per application pair, on a service of
// its own, each writing a pattern into its slot of the server's memory
// and reading it back, checked, round after round; then a message each
// says goodbye. The server only accepts and waits on its CQ: its posted
// receives complete with the goodbyes, or in error when its device goes
// away (which it reports as "device-gone").
const (
	serviceEnv = "SOFTFABRIC_FABTEST_SERVICE"
	roundsEnv  = "SOFTFABRIC_FABTEST_ROUNDS"
	waitEnv    = "SOFTFABRIC_FABTEST_WAIT"
	rma4EPs    = 4
	// rma4Timeout is the endpoints' RC ACK timeout: 537 ms, so that 7
	// tries outlast the seconds a process can wait for a core when 16 of
	// them and two daemons share CI's two (the default 67 ms does not).
	rma4Timeout = 17
	rma4Slot    = 64 << 10
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func rma4Server(self string) error {
	s, pep, err := listen(self, uint16(envInt(serviceEnv, 7480)))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	buf := s.mr.Bytes()
	var eps []*fabric.Endpoint
	for len(eps) < rma4EPs {
		ev, err := s.eq.Read(ctx)
		if err != nil {
			return fmt.Errorf("connection request: %w", err)
		}
		if ev.Kind != fabric.EventConnReq {
			continue
		}
		ep, err := s.endpoint(ev.Info)
		if err != nil {
			return err
		}
		if err := ep.SetOption(fabric.OptTimeout, rma4Timeout); err != nil {
			return err
		}
		i := len(eps)
		// The goodbye lands after the slots.
		if err := ep.Recv(buf[rma4EPs*rma4Slot+i*64:rma4EPs*rma4Slot+(i+1)*64], s.mr.Desc(), fabric.AddrUnspec, uint64(i)); err != nil {
			return err
		}
		var priv [16]byte
		binary.LittleEndian.PutUint64(priv[:], s.mr.Addr()+uint64(i*rma4Slot))
		binary.LittleEndian.PutUint64(priv[8:], s.mr.Key())
		if err := ep.Accept(ctx, priv[:]); err != nil {
			return err
		}
		eps = append(eps, ep)
	}
	fmt.Println("accepted")
	for byes := 0; byes < rma4EPs; {
		n, err := s.cq.ReadContext(ctx, s.out[:])
		if errors.Is(err, fabric.ErrDeviceGone) {
			fmt.Println("device-gone:", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("waiting for the goodbyes: %w", err)
		}
		for _, c := range s.out[:n] {
			if err := c.Err(); err != nil {
				// Flushed by the device going away: the next read says why.
				fmt.Println("error-completion:", err)
				continue
			}
			if c.Flags&fabric.FlagRecv != 0 {
				byes++
			}
		}
	}
	// The client closes its endpoints once its goodbyes are acknowledged:
	// leave before, and the last acknowledgements would go unsent.
	for shut := 0; shut < rma4EPs; {
		ev, err := s.eq.Read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the shutdowns: %w", err)
		}
		if ev.Kind == fabric.EventShutdown {
			shut++
		}
	}
	for _, ep := range eps {
		_ = ep.Close()
	}
	return pep.Close()
}

// rma4Client runs the client; an error once it is connected is the peer
// (or the device) going away, and says so for the tests that cause it.
func rma4Client(self, peer string) error {
	connected := false
	err := rma4ClientRun(self, peer, &connected)
	if err != nil && connected {
		fmt.Println("peer-gone:", err)
	}
	return err
}

func rma4ClientRun(self, peer string, connected *bool) error {
	service := uint16(envInt(serviceEnv, 7480))
	rounds := envInt(roundsEnv, 50)
	s, err := open(self, fabric.EPMsg, fabric.ProgressAuto, 0)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	type conn struct {
		ep         *fabric.Endpoint
		addr, key  uint64
		out, check []byte
	}
	var cs []conn
	for i := 0; i < rma4EPs; i++ {
		ep, err := s.endpoint(&s.info)
		if err != nil {
			return err
		}
		if err := ep.SetOption(fabric.OptTimeout, rma4Timeout); err != nil {
			return err
		}
		if err := ep.Connect(ctx, netip.AddrPortFrom(netip.MustParseAddr(peer), service), nil); err != nil {
			return err
		}
		var priv []byte
		for priv == nil {
			ev, err := s.eq.Read(ctx)
			if err != nil {
				return fmt.Errorf("connecting endpoint %d: %w", i, err)
			}
			if ev.Kind == fabric.EventConnected {
				priv = ev.Data
			}
		}
		if len(priv) < 16 {
			return fmt.Errorf("endpoint %d: private data %d bytes", i, len(priv))
		}
		buf := s.mr.Bytes()
		cs = append(cs, conn{ep: ep, addr: binary.LittleEndian.Uint64(priv), key: binary.LittleEndian.Uint64(priv[8:]),
			out: buf[i*2*rma4Slot : i*2*rma4Slot+rma4Slot], check: buf[i*2*rma4Slot+rma4Slot : (i+1)*2*rma4Slot]})
	}
	fmt.Println("connected")
	*connected = true
	if os.Getenv(waitEnv) != "" {
		// The test looks at the daemons with every pair connected, then
		// says go.
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for go: %w", err)
		}
	}
	for r := 0; r < rounds; r++ {
		n := 1 + (r*7919)%rma4Slot
		for i, c := range cs {
			pattern(c.out[:n], r*rma4EPs+i)
			if err := s.post(func() error { return c.ep.Write(c.out[:n], s.mr.Desc(), fabric.AddrUnspec, c.addr, c.key, 1) }); err != nil {
				return err
			}
		}
		for range cs {
			if _, err := s.next(); err != nil {
				return err
			}
		}
		for _, c := range cs {
			clear(c.check[:n])
			if err := s.post(func() error { return c.ep.Read(c.check[:n], s.mr.Desc(), fabric.AddrUnspec, c.addr, c.key, 2) }); err != nil {
				return err
			}
		}
		for range cs {
			if _, err := s.next(); err != nil {
				return err
			}
		}
		for i, c := range cs {
			if !bytes.Equal(c.check[:n], c.out[:n]) {
				return fmt.Errorf("round %d endpoint %d: %d bytes read back differ from those written", r, i, n)
			}
		}
	}
	for _, c := range cs {
		bye := c.out[:copy(c.out, "bye")]
		if err := s.post(func() error { return c.ep.Send(bye, s.mr.Desc(), fabric.AddrUnspec, 3) }); err != nil {
			return err
		}
	}
	for range cs {
		if _, err := s.next(); err != nil {
			return err
		}
	}
	for _, c := range cs {
		if err := c.ep.Close(); err != nil {
			return err
		}
	}
	fmt.Println("done")
	return nil
}

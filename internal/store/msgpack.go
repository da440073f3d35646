package store

import (
	"encoding/binary"
	"math"
)

// msgpack is a script item's arguments as the scripts read them: MessagePack
// values one after the other, unpacked by Redis' cmsgpack in one call (see
// lua/common.lua). It writes the three kinds the arguments hold, each in its
// shortest MessagePack form.
type msgpack []byte

func (m msgpack) str(s string) msgpack {
	switch n := len(s); {
	case n < 32:
		m = append(m, 0xa0|byte(n))
	case n <= math.MaxUint8:
		m = append(m, 0xd9, byte(n))
	case n <= math.MaxUint16:
		m = binary.BigEndian.AppendUint16(append(m, 0xda), uint16(n))
	default:
		m = binary.BigEndian.AppendUint32(append(m, 0xdb), uint32(n))
	}
	return append(m, s...)
}

func (m msgpack) int(n int64) msgpack {
	switch {
	case n >= 0 && n < 128:
		return append(m, byte(n))
	case n >= -32 && n < 0:
		return append(m, byte(n)) // negative fixint: 0xe0 | the low 5 bits
	case n >= 0 && n <= math.MaxUint8:
		return append(m, 0xcc, byte(n))
	case n >= 0 && n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(m, 0xcd), uint16(n))
	case n >= 0 && n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(m, 0xce), uint32(n))
	case n >= 0:
		return binary.BigEndian.AppendUint64(append(m, 0xcf), uint64(n))
	case n >= math.MinInt8:
		return append(m, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(m, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(m, 0xd2), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(m, 0xd3), uint64(n))
	}
}

// float writes f as a float64, which the scripts read bit for bit.
func (m msgpack) float(f float64) msgpack {
	return binary.BigEndian.AppendUint64(append(m, 0xcb), math.Float64bits(f))
}

// array starts an array of n values, which follow it: cmsgpack reads it
// as one Lua table.
func (m msgpack) array(n int) msgpack {
	if n < 16 {
		return append(m, 0x90|byte(n))
	}
	return binary.BigEndian.AppendUint16(append(m, 0xdc), uint16(n))
}

func (m msgpack) bool(b bool) msgpack {
	if b {
		return m.int(1)
	}
	return m.int(0)
}

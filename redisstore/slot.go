package redisstore

// Redis Cluster maps a key to one of 16384 slots by CRC16 (XMODEM: poly
// 0x1021, init 0, no reflection) of its hash tag. go-redis has the same
// code in its internal hashtag package, which we cannot import.

const clusterSlots = 16384

// crc16tab is the table of CRC16/XMODEM, built once.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^s[i]]
	}
	return crc
}

// hashTag returns the part of key Redis Cluster hashes: what lies between
// the first '{' and the first '}' after it, when that is not empty, and
// otherwise the whole key.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key
				}
				return key[i+1 : j]
			}
		}
		return key
	}
	return key
}

// slot returns the Cluster hash slot of key, as CLUSTER KEYSLOT does.
func slot(key string) uint16 {
	return crc16(hashTag(key)) % clusterSlots
}

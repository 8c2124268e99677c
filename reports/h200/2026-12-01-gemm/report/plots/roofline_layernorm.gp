# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_layernorm.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_layernorm.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_layernorm.svg"
set title "roofline: layernorm (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [0.249969:7.99902]
set yrange [1.19099e+09:1.36133e+14]
plot data . "roofline_layernorm_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     data . "roofline_layernorm_baselines.dat" using 1:2 with points pt 6 ps 1.2 title "best baseline", \
     4.25467e+12 * x with lines lw 2 title "DRAM copy ceiling (4.25 TB/s)"

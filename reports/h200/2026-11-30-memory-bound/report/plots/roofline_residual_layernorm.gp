# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_residual_layernorm.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_residual_layernorm.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_residual_layernorm.svg"
set title "roofline: residual_layernorm (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [0.140616:4.49997]
set yrange [3.90483e+11:7.6705e+13]
plot data . "roofline_residual_layernorm_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     data . "roofline_residual_layernorm_baselines.dat" using 1:2 with points pt 6 ps 1.2 title "best baseline", \
     4.26142e+12 * x with lines lw 2 title "DRAM copy ceiling (4.26 TB/s)"
